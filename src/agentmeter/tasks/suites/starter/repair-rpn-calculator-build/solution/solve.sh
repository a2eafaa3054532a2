#!/bin/bash
set -euo pipefail
cd /app
# 1) include guard for stack.h (it is included twice by main.c -> redefinition of 'stack')
cat > include/stack.h <<'H'
#ifndef STACK_H
#define STACK_H
/* Fixed-size stack of doubles. */
typedef struct {
    double v[64];
    int n;
} stack;

int push(stack *s, double x);
int pop(stack *s, double *out);
#endif
H
# 2) apply() definition must match its const-qualified prototype
sed -i 's/^int apply(stack \*s, char \*op) {/int apply(stack *s, const char *op) {/' src/ops.c
# 3) Makefile: include dir, libm, build dir, header dependencies
cat > Makefile <<'MK'
CC = gcc
CFLAGS = -O2 -Wall -Werror -Iinclude
DEPFLAGS = -MMD -MP
LDLIBS = -lm
SRCS = $(wildcard src/*.c)
OBJS = $(SRCS:src/%.c=build/%.o)

rpn: $(OBJS)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

build/%.o: src/%.c | build
	$(CC) $(CFLAGS) $(DEPFLAGS) -c $< -o $@

build:
	mkdir -p build

clean:
	rm -rf build rpn

.PHONY: clean

-include $(OBJS:.o=.d)
MK
make clean && make
./rpn 3 4 + 2 x
