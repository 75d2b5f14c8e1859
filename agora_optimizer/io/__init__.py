"""Readers and writers for workflow, catalog and plan files."""
