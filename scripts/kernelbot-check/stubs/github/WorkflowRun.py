class WorkflowRun: pass
