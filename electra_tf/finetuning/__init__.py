"""Fine-tuning: configuration, GLUE and SQuAD tasks, heads and the training loop."""
