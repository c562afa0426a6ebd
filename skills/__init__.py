"""skills: the skill catalog (Agent Skills folders under skills/catalog/), its validator, the
trigger matcher that proposes debug directions, the lessons runs leave, and the optimization
memory of every transform tried."""

from .catalog import CATALOG_DIR, Catalog, CatalogError, Skill, Trigger, load_catalog, validate
from .matcher import SkillMatcher, Symptoms, match

__all__ = ["CATALOG_DIR", "Catalog", "CatalogError", "Skill", "SkillMatcher", "Symptoms",
           "Trigger", "load_catalog", "match", "validate"]
