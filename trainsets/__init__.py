"""Dataset definitions and hand-made trainsets with gold answers and gold evidence (see DESIGN.md)."""
