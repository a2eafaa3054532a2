import random
import sqlite3
import sys


def make(path: str, seed: int) -> None:
    r = random.Random(seed)
    db = sqlite3.connect(path)
    db.executescript("""
    CREATE TABLE categories (id INTEGER PRIMARY KEY, name TEXT NOT NULL);
    CREATE TABLE products (id INTEGER PRIMARY KEY, name TEXT NOT NULL,
        category_id INTEGER REFERENCES categories(id), price REAL NOT NULL,
        discontinued INTEGER NOT NULL DEFAULT 0);
    """)
    cats = ["Books", "Garden", "Kitchen", "Toys", "Audio", "Office", "Sports"]
    r.shuffle(cats)
    for i, c in enumerate(cats, 1):
        db.execute("INSERT INTO categories VALUES (?, ?)", (i, c))
    for pid in range(1, 61 + seed % 7):
        cat = r.randint(1, len(cats) - 1)  # last category gets only discontinued items
        disc = 1 if r.random() < 0.25 else 0
        db.execute("INSERT INTO products VALUES (?,?,?,?,?)",
                   (pid, f"item-{pid}", cat, round(r.uniform(1, 300), 2), disc))
    db.execute("INSERT INTO products VALUES (999, 'old thing', ?, 50, 1)", (len(cats),))
    db.commit()
    db.close()


if __name__ == "__main__":
    make(sys.argv[1], int(sys.argv[2]))
