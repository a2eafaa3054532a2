/* Fixed-size stack of doubles. */
typedef struct {
    double v[64];
    int n;
} stack;

int push(stack *s, double x);
int pop(stack *s, double *out);
