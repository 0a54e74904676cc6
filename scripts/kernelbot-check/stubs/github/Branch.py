class Branch: pass
