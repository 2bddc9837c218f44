/* kubectl/text.c - an object's text made safe for a terminal.
 *
 * Any string kubectl-egpu prints in a table or a message may come from a
 * tenant (an object's name, a claim, a model, the API server's message
 * naming them). Before it reaches the terminal, every character that can
 * drive the terminal or reorder what the reader sees becomes one '?':
 * - C0 controls U+0000..U+001F and DEL U+007F (ESC starts a sequence, a
 *   newline adds a line);
 * - C1 controls U+0080..U+009F (ECMA-48 8.2.1: U+009B is CSI, U+009D OSC,
 *   U+009C ST, so "\u009b2J" clears the screen on terminals that obey C1);
 * - a byte that is not part of well-formed UTF-8 (Unicode 15, table 3-7: no
 *   overlong forms, no surrogates, nothing past U+10FFFF), so a raw 0x9B
 *   cannot act as CSI on an 8-bit terminal;
 * - the Unicode bidirectional formatting characters (UAX #9 2.1-2.6): the
 *   embeddings and overrides U+202A..U+202E, the isolates U+2066..U+2069,
 *   the marks U+200E, U+200F and U+061C, which make a name read as another
 *   (CVE-2021-42574, "Trojan Source"); and the line and paragraph
 *   separators U+2028, U+2029, which add a line.
 * Other text, ASCII and UTF-8 alike, is kept byte for byte. -o json prints
 * the original strings (JSON escapes them itself).
 */
#include <stdbool.h>
#include <stdint.h>

#include "kubectl_int.h"

/* The length (2..4) of the well-formed UTF-8 sequence at s, its code point
 * in *cp; 0 when s[0] starts none (Unicode 15, table 3-7). */
static int utf8_seq(const unsigned char *s, uint32_t *cp)
{
    unsigned char lo = 0x80, hi = 0xbf;
    int n;

    if (s[0] >= 0xc2 && s[0] <= 0xdf) {
        n = 2;
        *cp = s[0] & 0x1fu;
    } else if (s[0] >= 0xe0 && s[0] <= 0xef) {
        n = 3;
        *cp = s[0] & 0x0fu;
        if (s[0] == 0xe0)
            lo = 0xa0; /* no overlong form */
        else if (s[0] == 0xed)
            hi = 0x9f; /* no surrogate */
    } else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
        n = 4;
        *cp = s[0] & 0x07u;
        if (s[0] == 0xf0)
            lo = 0x90;
        else if (s[0] == 0xf4)
            hi = 0x8f; /* nothing past U+10FFFF */
    } else {
        return 0;
    }
    for (int i = 1; i < n; i++) {
        /* A NUL ends the string here: it is below lo, so no read past it. */
        if (s[i] < lo || s[i] > hi)
            return 0;
        *cp = *cp << 6 | (s[i] & 0x3fu);
        lo = 0x80;
        hi = 0xbf;
    }
    return n;
}

static bool unsafe(uint32_t cp)
{
    return cp < 0x20 || (cp >= 0x7f && cp <= 0x9f) || cp == 0x061c || cp == 0x200e ||
           cp == 0x200f || (cp >= 0x2028 && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
}

void egpu__kubectl_text_clean(char *s)
{
    const unsigned char *r = (const unsigned char *)s;
    unsigned char *w = (unsigned char *)s;

    while (*r != '\0') {
        uint32_t cp = *r;
        int n = cp < 0x80 ? 1 : utf8_seq(r, &cp);

        if (n == 0 || unsafe(cp)) {
            *w++ = '?';
            r += n ? n : 1;
            continue;
        }
        for (int i = 0; i < n; i++)
            *w++ = *r++;
    }
    *w = '\0';
}
