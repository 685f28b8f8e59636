mod connections;
