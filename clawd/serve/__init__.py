"""serve: the OpenAI-compatible HTTP stage. Records turns; imports no other stage."""
