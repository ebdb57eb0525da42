"""Texts into tokens: tokenizers, length rules, cheap truncation, windows, prompts and pairs."""
