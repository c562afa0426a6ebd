"""agents: who works the phases. The offline `autopilot` (the default) and `claude` (the
Anthropic Messages API tool-use loop), both through the same toolbox and gates."""
