"""Bringing a fleet up and down and saying how it is: the layer that acts on nodes."""
