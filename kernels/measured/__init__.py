"""Measured data, upstream's and ours, kept apart: upstream's kernel registry as ingested
into kernels/data/ (`measurements` reads it, `ingest` writes it), the C signatures of its
micro-kernels (`upstream_kernels`), its LLM deployments (`upstream_llm_pages` reads the pages,
`deployments` compares our plans with them; `quantized_deployments` holds its 4-bit
deployments' published figures), the rows measured here by `validate-hardware`
(`measured_here`), and a kernel's time with where it came from (`figures`).

Importing this package imports none of its modules: each public name, listed in
`__init__.pyi`, is imported the first time it is asked for (lazy_loader)."""

import lazy_loader as lazy

__getattr__, __dir__, __all__ = lazy.attach_stub(__name__, __file__)
