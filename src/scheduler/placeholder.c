/* scheduler/placeholder.c - keeps egpu_sched non-empty until the extender lands. */
#include "egpu/core.h"

int egpu__sched_placeholder(void);

int egpu__sched_placeholder(void)
{
    return 0;
}
