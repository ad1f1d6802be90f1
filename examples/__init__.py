"""Runnable examples (see README.md here); a package so workers can import ``examples.<module>``."""
