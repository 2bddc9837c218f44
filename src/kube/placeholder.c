/* kube/placeholder.c - keeps egpu_kube non-empty until the client lands. */
#include "egpu/core.h"

int egpu__kube_placeholder(void);

int egpu__kube_placeholder(void)
{
    return 0;
}
