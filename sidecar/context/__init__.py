"""The model's input: the history window, tool-result trimming and session memory."""
