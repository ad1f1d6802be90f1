"""Behaviour tests of the agent loop, driven through real runs with the scripted provider."""
