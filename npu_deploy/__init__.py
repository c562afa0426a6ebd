"""npu-deploy: the command line that ties the packages together."""
