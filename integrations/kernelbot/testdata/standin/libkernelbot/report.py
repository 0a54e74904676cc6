# Stand-in for Kernelbot's RunProgressReporter (src/libkernelbot/report.py at
# 4bdd839a): push appends a line, update replaces the last one.
class RunProgressReporter:
    def __init__(self, title: str):
        self.title = title
        self.lines = []

    async def push(self, content):
        self.lines.append(f"> {content}")

    async def update(self, new_content: str):
        self.lines[-1] = f"> {new_content}"

    async def update_title(self, new_title):
        self.title = new_title
