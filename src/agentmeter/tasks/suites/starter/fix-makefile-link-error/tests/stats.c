#include <math.h>
#include <stdio.h>

/* Reads numbers from stdin; prints count, mean and population standard deviation. */
int main(void) {
    double x, sum = 0.0, sumsq = 0.0;
    long n = 0;
    while (scanf("%lf", &x) == 1) {
        sum += x;
        sumsq += x * x;
        n++;
    }
    if (n == 0) {
        fprintf(stderr, "no input\n");
        return 1;
    }
    double mean = sum / n;
    double var = sumsq / n - mean * mean;
    if (var < 0) var = 0;
    printf("n=%ld mean=%.3f sd=%.3f\n", n, mean, sqrt(var));
    return 0;
}
