"""The real control plane of the test tier (issue 26): see control_plane.py and go.mod."""
