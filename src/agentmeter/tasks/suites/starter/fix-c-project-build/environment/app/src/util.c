#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "words.h"

void lower(char *s) {
    for (; *s; s++) *s = (char)tolower((unsigned char)*s);
}

static int cmp(const void *a, const void *b) {
    const entry *x = a, *y = b;
    if (x->count != y->count) return x->count < y->count ? 1 : -1;
    return strcmp(x->word, y->word);
}

void sort_entries(entry *e, size_t n) { qsort(e, n, sizeof *e, cmp); }
