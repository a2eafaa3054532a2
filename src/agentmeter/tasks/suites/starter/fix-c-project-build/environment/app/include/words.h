#ifndef WORDS_H
#define WORDS_H

#include <stddef.h>

typedef struct {
    char *word;
    long count;
} entry;

/* Lower-cases s in place. */
void lower(char *s);
/* Counts words read from stdin into a growing array; returns number of distinct words. */
size_t count_words(entry **out);
/* Sorts by count descending, then word ascending. */
void sort_entries(entry *e, size_t n);

#endif
