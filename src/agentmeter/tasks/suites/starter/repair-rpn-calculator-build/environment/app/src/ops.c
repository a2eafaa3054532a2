#include <math.h>
#include <string.h>

#include "ops.h"

int apply(stack *s, char *op) {
    double a, b;
    if (strcmp(op, "sqrt") == 0) {
        if (pop(s, &a) || a < 0) return -1;
        return push(s, sqrt(a));
    }
    if (pop(s, &b) || pop(s, &a)) return -1;
    switch (op[0]) {
    case '+': return push(s, a + b);
    case '-': return push(s, a - b);
    case 'x': return push(s, a * b);
    case '/': return b == 0 ? -1 : push(s, a / b);
    case '^': return push(s, pow(a, b));
    }
    return -1;
}
