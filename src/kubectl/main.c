/* kubectl/main.c - kubectl-egpu, the kubectl plugin (`kubectl egpu ...`):
 * kubectl runs the first kubectl-egpu on PATH with the arguments after
 * "egpu". Everything is in cmd.c (egpu_kubectl_main) and render.c. */
#include "egpu/kubectl.h"

int main(int argc, char **argv)
{
    return egpu_kubectl_main(argc, argv);
}
