"""Painted level meters with peak hold."""
