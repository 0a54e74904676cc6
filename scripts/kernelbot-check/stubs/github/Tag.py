class Tag: pass
