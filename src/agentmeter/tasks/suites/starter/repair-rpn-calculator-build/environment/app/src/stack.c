#include "stack.h"

int push(stack *s, double x) {
    if (s->n >= 64) return -1;
    s->v[s->n++] = x;
    return 0;
}

int pop(stack *s, double *out) {
    if (s->n == 0) return -1;
    *out = s->v[--s->n];
    return 0;
}
