/* tests/vcuda/next_b.c - libvcuda_next_b.so: the definition of
 * egpu_next_probe that RTLD_NEXT from libvcuda_next_a.so must find (see
 * next_a.c). Test code, never shipped. */
int egpu_next_probe(void);

int egpu_next_probe(void)
{
    return 2;
}
