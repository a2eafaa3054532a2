#!/bin/bash
set -euo pipefail
cd /app
cat > Makefile <<'MK'
CC = gcc
CFLAGS = -O2 -Wall
LDLIBS = -lm

stats: stats.o
	$(CC) $(CFLAGS) -o stats stats.o $(LDLIBS)

stats.o: stats.c
	$(CC) $(CFLAGS) -c stats.c

clean:
	rm -f stats stats.o

.PHONY: clean
MK
make clean && make
echo 1 2 3 | ./stats
