class connection: pass
class cursor: pass
