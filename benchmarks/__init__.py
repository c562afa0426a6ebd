"""Benchmark scripts: each prints figures measured in one run on this machine."""

from npu_deploy.import_path import leave_the_checkout

# `python -m benchmarks.NAME` runs from the checkout, which -m puts on sys.path: off it again,
# or our kernels/ would be imported where transformers asks for Hugging Face's `kernels`.
leave_the_checkout()
