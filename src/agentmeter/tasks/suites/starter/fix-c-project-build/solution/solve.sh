#!/bin/bash
set -euo pipefail
cd /app
cat > Makefile <<'MK'
CC = gcc
CFLAGS = -O2 -Wall -Iinclude
OBJS = build/main.o build/count.o build/util.o

bin/wordfreq: $(OBJS)
	@mkdir -p bin
	$(CC) $(CFLAGS) -o $@ $(OBJS)

build/%.o: src/%.c include/words.h
	@mkdir -p build
	$(CC) $(CFLAGS) -c $< -o $@

clean:
	rm -rf build bin

.PHONY: clean
MK
make clean && make && make
echo "a b a" | bin/wordfreq
