/* The PMIx client API that rmr-boot binds (bindgen input). */
#include <pmix.h>
