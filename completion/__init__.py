"""Document text + cursor -> FIM prompts for the engine -> clean ghost text for the editor."""
