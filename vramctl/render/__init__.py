"""Formatting: rich tables and bars, JSON, Markdown, plots. The only layer that formats for people."""
