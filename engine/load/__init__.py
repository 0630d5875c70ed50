"""Loading models and tokenizers: from a transformers folder or straight from the checkpoint
(models.py, checkpoint.py), the tokenizer from tokenizer.json (tokenizer.py) and the engine's
vocabulary from it (vocab_tables.py), with quantized weights and tokenizer tables kept on disk
(weight_cache.py, vocab_cache.py)."""
