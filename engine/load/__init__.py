"""Loading models and tokenizers: from a transformers folder or straight from the checkpoint
(models.py, checkpoint.py), with quantized weights and tokenizer tables kept on disk."""
