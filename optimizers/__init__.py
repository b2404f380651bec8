"""Compile, trajectory tracing, policy distillation, the artifact store and the ledger (see DESIGN.md)."""
