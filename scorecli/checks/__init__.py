"""The start-up checks: scorecli's scores against the model's own forward (`selfcheck`) and the
measured drift of an approximate runtime (`drift`); each kind supplies its probe.
"""
