#ifndef OPS_H
#define OPS_H
#include "stack.h"

/* Applies operator token op to the stack; returns 0 on success, -1 on error. */
int apply(stack *s, const char *op);
#endif
