"""DSPy programs (the single-shot baseline in baseline.py, the deep-thinking loop in deep.py) and the tools
they call. Nothing is imported here: the optimizers import the trajectory types without the programs."""
