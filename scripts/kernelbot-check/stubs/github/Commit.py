class Commit: pass
