"""pipeline: the phases' substance. What a run's agents and gates share (`workspace`), the
operations agents act through (`toolbox`), the eight gates (`gates`), the deployment as data
(`recipe`) and the model it runs (`deployed`), the inference runner users chat with
(`inference`), the Phase-6 report (`report`) and the independent evaluator (`evaluator`)."""
