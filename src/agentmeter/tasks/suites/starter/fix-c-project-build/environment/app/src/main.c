#include <stdio.h>
#include <stdlib.h>

#include "words.h"

/* Usage: wordfreq [N]  -- prints the N (default 3) most frequent words on stdin. */
int main(int argc, char **argv) {
    long top = argc > 1 ? strtol(argv[1], NULL, 10) : 3;
    entry *e;
    size_t n = count_words(&e);
    sort_entries(e, n);
    for (size_t i = 0; i < n && (long)i < top; i++) printf("%ld %s\n", e[i].count, e[i].word);
    return 0;
}
