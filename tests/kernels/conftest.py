"""Fixtures shared by the kernels' tests."""

import pytest


@pytest.fixture(scope="session")
def bundled_quantized_tensors():
    """The first quantized tensor of each (block type, shape) in the bundled SmolLM2 GGUF,
    as {(GGMLQuantizationType, (rows, K)): bytes}. Read once: parsing the GGUF's metadata
    (its 49,152-token vocabulary) takes seconds."""
    import gguf

    from npu_deploy.models.sources import bundled_gguf

    found: dict = {}
    for t in gguf.GGUFReader(bundled_gguf()).tensors:
        if t.tensor_type in (gguf.GGMLQuantizationType.Q4_1, gguf.GGMLQuantizationType.Q8_0):
            key = (t.tensor_type, (int(t.shape[1]), int(t.shape[0])))
            if key not in found:
                found[key] = t.data.tobytes()
    return found
