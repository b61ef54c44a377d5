"""Porting real models: Flux/Lux layers <-> Equinox, Flax and PyTorch, numerically exact.

``_spec`` is the layer description all paths share (see its docstring).
"""
