#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stack.h"
#include "ops.h"

/* Usage: rpn TOKEN...   e.g. rpn 3 4 + 2 x  -> 14 */
int main(int argc, char **argv) {
    stack s = {.n = 0};
    for (int i = 1; i < argc; i++) {
        char *end;
        double x = strtod(argv[i], &end);
        int err = (*end == '\0' && end != argv[i]) ? push(&s, x) : apply(&s, argv[i]);
        if (err) {
            fprintf(stderr, "error at token %d: %s\n", i, argv[i]);
            return 1;
        }
    }
    double r;
    if (s.n != 1 || pop(&s, &r)) {
        fprintf(stderr, "error: malformed expression\n");
        return 1;
    }
    printf("%.10g\n", r);
    return 0;
}
