"""Persistence: the list lives in a JSON file (path from $TODO_FILE, default ./todo.json)."""
import json
import os


def path():
    return os.environ.get("TODO_FILE", "todo.json")


def load():
    try:
        with open(path()) as f:
            return json.load(f)
    except FileNotFoundError:
        return {"next_id": 1, "tasks": []}


def save(data):
    tmp = path() + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=2)
    os.replace(tmp, path())


def add(data, text):
    task = {"id": data["next_id"], "text": text, "done": False}
    data["next_id"] += 1
    data["tasks"].append(task)
    return task


def find(data, task_id):
    for task in data["tasks"]:
        if task["id"] == task_id:
            return task
    return None
