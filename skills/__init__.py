"""skills: the skill catalog (Agent Skills folders under skills/catalog/), its validator,
and the trigger matcher that proposes debug directions. The toolbox and the agents come
with the rest of the autopilot issue."""

from .catalog import (
    CATALOG_DIR,
    Catalog,
    CatalogError,
    Skill,
    SkillMatcher,
    Symptoms,
    Trigger,
    load_catalog,
    match,
    validate,
)

__all__ = ["CATALOG_DIR", "Catalog", "CatalogError", "Skill", "SkillMatcher", "Symptoms",
           "Trigger", "load_catalog", "match", "validate"]
