"""Torch-free: regression rules, Markdown report, chart, escaping of untrusted text."""
