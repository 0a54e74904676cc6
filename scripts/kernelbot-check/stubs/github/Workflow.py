class Workflow: pass
