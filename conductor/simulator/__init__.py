"""The simulated orchestra: an OpenAI-compatible server whose workers answer known tasks with calibrated
skill, correlated errors and step interactions — for training and debugging without API spend."""
