/* tests/layering/layer_main.c - the main of the egpu_layer_<component>
 * executables (cmake/egpu_layers.cmake): they link the whole of a component's
 * libraries against the layers below it, so the link itself is the check and
 * the program is never run. */
int main(void)
{
    return 0;
}
