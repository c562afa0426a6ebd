"""oracle: Phase 0's FP32 reference, decomposed op by op (`reference`), the canonical prompts
every gate runs (`prompts`), and the golden tensors kept in the store (`goldens`)."""

from npu_deploy.models.loading import LoadedModel

from .reference import Reference


def reference_of(loaded: LoadedModel) -> Reference:
    """The FP32 reference of a loaded model, from the weights read straight off its files."""
    return Reference(loaded.args, loaded.weights)


__all__ = ["Reference", "reference_of"]
