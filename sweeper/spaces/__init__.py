"""Spaces shipped inside the package (the demo space: `sweeper demo`)."""
