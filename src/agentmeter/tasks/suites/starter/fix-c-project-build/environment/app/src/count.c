#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "words.h"

size_t count_words(entry **out) {
    size_t n = 0, cap = 16;
    entry *e = malloc(cap * sizeof *e);
    char buf[256];
    size_t len = 0;
    int c;
    do {
        c = getchar();
        if (c != EOF && isalpha(c)) {
            if (len < sizeof buf - 1) buf[len++] = (char)c;
            continue;
        }
        if (len == 0) continue;
        buf[len] = '\0';
        len = 0;
        lower(buf);
        size_t i;
        for (i = 0; i < n && strcmp(e[i].word, buf) != 0; i++) {}
        if (i < n) { e[i].count++; continue; }
        if (n == cap) e = realloc(e, (cap *= 2) * sizeof *e);
        e[n].word = strdup(buf);
        e[n].count = 1;
        n++;
    } while (c != EOF);
    *out = e;
    return n;
}
