"""Torch-free: the GitHub REST client and the sticky pull-request comment."""
